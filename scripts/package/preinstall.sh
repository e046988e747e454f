#!/bin/sh
# tpcoord package, before its files are unpacked (deb preinst install|upgrade;
# rpm %pre): create the tpcoord system user and group the units run as, and
# that owns /etc/tpcoord and /var/lib/tpcoord, so that those files get their
# owner. Idempotent; an existing user is left as it is.
set -e

if ! getent group tpcoord >/dev/null; then
  groupadd --system tpcoord
fi
if ! getent passwd tpcoord >/dev/null; then
  shell=/usr/sbin/nologin
  [ -x "$shell" ] || shell=/sbin/nologin
  [ -x "$shell" ] || shell=/bin/false
  useradd --system --gid tpcoord --home-dir /var/lib/tpcoord --no-create-home \
    --shell "$shell" --comment "tpcoord agent" tpcoord
fi
