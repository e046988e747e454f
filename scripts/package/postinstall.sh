#!/bin/sh
# tpcoord package, after install or upgrade (deb postinst configure; rpm
# %post): make systemd read the new units. Nothing is enabled, started or
# restarted: a rank that restarts on its own leaves the job it is part of,
# so an upgrade takes effect when the operator restarts tpcoord.target.
set -e

if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
