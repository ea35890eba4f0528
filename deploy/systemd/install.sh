#!/bin/sh
# Install tierd as a systemd service, from a checkout (run as root):
#
#   deploy/systemd/install.sh              # PREFIX=/opt/tierd
#   PREFIX=/srv/tierd deploy/systemd/install.sh
#
# 1. a venv at $PREFIX/.venv made with the system's python3 (3.11 or later; Debian: apt-get
#    install python3-venv), holding tierd and the libraries' tested versions (constraints.txt);
# 2. the hardened unit in $UNITDIR (/etc/systemd/system), its paths under $PREFIX;
# 3. /etc/tierd and the state directory /var/lib/tierd (mode 0700);
# 4. when /etc/tierd/config.yaml exists, the unit's drop-in for its paths
#    (tierd.service.d/paths.conf, from `tierd systemd drop-in`), then `systemctl daemon-reload`.
# Run it again to upgrade (the venv is refreshed in place); then `systemctl restart tierd`.
set -eu

PREFIX=${PREFIX:-/opt/tierd}
PYTHON=${PYTHON:-python3}
UNITDIR=${UNITDIR:-/etc/systemd/system}
CONFIG=${CONFIG:-/etc/tierd/config.yaml}
SRC=$(cd "$(dirname "$0")/../.." && pwd)

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  { echo "install.sh: tierd needs Python 3.11 or later ($PYTHON is older)" >&2; exit 1; }
"$PYTHON" -c 'import ensurepip' 2>/dev/null ||
  { echo "install.sh: $PYTHON cannot make a venv (Debian: apt-get install python3-venv)" >&2; exit 1; }

echo "install.sh: venv $PREFIX/.venv"
mkdir -p "$PREFIX"
"$PYTHON" -m venv "$PREFIX/.venv"
# pip builds in the source tree: build from a copy, so a read-only checkout installs too.
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
cp -R "$SRC/pyproject.toml" "$SRC/README.md" "$SRC/tierd" "$SRC/client" "$BUILD/"
# The daemon depends on the client's distribution (tierd-client), built from the same tree.
"$PREFIX/.venv/bin/pip" install --quiet --disable-pip-version-check \
  --constraint "$SRC/constraints.txt" "$BUILD/client" "$BUILD"
"$PREFIX/.venv/bin/tierd" --version

echo "install.sh: unit $UNITDIR/tierd.service"
mkdir -p "$UNITDIR/tierd.service.d"
sed "s|/opt/tierd/|$PREFIX/|g" "$SRC/deploy/systemd/tierd.service" > "$UNITDIR/tierd.service"
install -d -m 0755 /etc/tierd
install -d -m 0700 /var/lib/tierd

if [ -f "$CONFIG" ]; then
  echo "install.sh: drop-in $UNITDIR/tierd.service.d/paths.conf for $CONFIG"
  "$PREFIX/.venv/bin/tierd" systemd drop-in --config "$CONFIG" > "$UNITDIR/tierd.service.d/paths.conf.new"
  mv "$UNITDIR/tierd.service.d/paths.conf.new" "$UNITDIR/tierd.service.d/paths.conf"
else
  echo "install.sh: no $CONFIG yet: write it, then"
  echo "  $PREFIX/.venv/bin/tierd systemd drop-in --config $CONFIG > $UNITDIR/tierd.service.d/paths.conf"
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "install.sh: done; start it with: systemctl enable --now tierd"
