#!/bin/sh
# tpcoord package, before its files go (deb prerm; rpm %preun): on removal
# (deb "remove", rpm "0" packages left), not on upgrade, stop the units that
# run from them. The tpcoord user and /etc/tpcoord's edited files stay.
set -e

case "$1" in
  remove | 0)
    if [ -d /run/systemd/system ]; then
      systemctl stop 'tpcoord@*.service' tpcoord-nats.service tpcoord-gateway.service tpcoord.target >/dev/null 2>&1 || true
    fi
    ;;
esac
