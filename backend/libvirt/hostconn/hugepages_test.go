package hostconn

import (
	"testing"

	"libvirt.org/go/libvirtxml"
)

// Huge page sizes and reserved totals as a two-cell host's capabilities
// list them (libvirt 9: KiB units, a count per cell).
func TestHugePagesOfCapabilities(t *testing.T) {
	t.Parallel()
	const x = `<capabilities><host><cpu><arch>x86_64</arch>
<pages unit='KiB' size='4'/><pages unit='KiB' size='2048'/><pages unit='KiB' size='1048576'/></cpu>
<topology><cells num='2'>
<cell id='0'><memory unit='KiB'>8000000</memory><pages unit='KiB' size='4'>2000000</pages><pages unit='KiB' size='2048'>100</pages><pages unit='KiB' size='1048576'>0</pages></cell>
<cell id='1'><memory unit='KiB'>8000000</memory><pages unit='KiB' size='4'>2000000</pages><pages unit='KiB' size='2048'>28</pages><pages unit='KiB' size='1048576'>2</pages></cell>
</cells></topology></host></capabilities>`
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	got := hugePagesOf(&caps, []uint64{2048, 1 << 20, 16 << 10})
	want := map[uint64]HugePages{
		2048:     {Supported: true, TotalKiB: 128 * 2048},
		1 << 20:  {Supported: true, TotalKiB: 2 << 20},
		16 << 10: {},
	}
	for size, w := range want {
		if got[size] != w {
			t.Errorf("%d KiB: %+v, want %+v", size, got[size], w)
		}
	}
	if kib(2, "MiB") != 2048 || kib(1, "GiB") != 1<<20 || kib(1, "TiB") != 0 {
		t.Error("kib units")
	}
}
