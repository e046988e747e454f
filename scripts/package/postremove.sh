#!/bin/sh
# tpcoord package, after its files went (deb postrm; rpm %postun): make
# systemd forget the removed units (on upgrade, reload the replaced ones).
set -e

if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
