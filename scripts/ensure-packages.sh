#!/bin/bash
# scripts/ensure-packages.sh PKG...: installs the Debian packages of the list
# that are not fully installed (one dpkg-query for all, apt-get only when
# something is missing), without recommends. Progress goes to stderr.
set -euo pipefail
missing=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "$@" 2>/dev/null |
	awk -v want="$*" '$2=="installed"{ok[$1]=1} END{n=split(want,w," "); for(i=1;i<=n;i++) if(!ok[w[i]]) print w[i]}' || true)
[ -z "$missing" ] && exit 0
echo "installing: $(echo $missing)" >&2
apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
# shellcheck disable=SC2086
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >&2
