#!/bin/bash
# scripts/golden/pool-volume.sh URI POOL IMAGE: puts a golden image built by
# build.sh into a libvirt storage pool (once per content: the volume is named
# after the image's sha256) and prints the volume's name, for --image.
# Copies of other builds not used for a day are removed: each is half a
# gigabyte. Used by make demo IMAGE=... and the golden and shapes tests.
set -euo pipefail
uri=${1:?usage: pool-volume.sh URI POOL IMAGE} pool=${2:?} image=${3:?}
sum=$(cut -c1-16 "$image.sha256" 2>/dev/null) || { echo "pool-volume: no $image.sha256" >&2; exit 1; }
name=bigfleet-golden-$sum.qcow2
dir=$(virsh -q -c "$uri" pool-dumpxml "$pool" | sed -n 's:.*<path>\(.*\)</path>.*:\1:p' | head -n1)
[ -d "$dir" ] || { echo "pool-volume: pool $pool has no directory target" >&2; exit 1; }
if [ ! -e "$dir/$name" ]; then
	cp --sparse=always "$image" "$dir/$name.tmp"
	chmod 0644 "$dir/$name.tmp"
	mv "$dir/$name.tmp" "$dir/$name"
fi
touch "$dir/$name"
find "$dir" -maxdepth 1 -name 'bigfleet-golden-*.qcow2' ! -name "$name" -mmin +1440 -delete
virsh -q -c "$uri" pool-refresh "$pool" >/dev/null
echo "$name"
