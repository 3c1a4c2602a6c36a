package meta

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Bounds of the readable parts of a domain name. With "bf-", two dashes and
// the 8-hex suffix a name is at most 61 characters: it fits a hostname label
// and leaves room for volume suffixes in a file name.
const (
	maxProviderPart = 16
	maxMachinePart  = 32
)

// DomainName derives the libvirt domain name of a machine:
//
//	bf-<provider>-<machine>-<8 hex of sha256(provider + "\x00" + machineID)>
//
// The readable parts are sanitised to [a-z0-9-] and truncated, so they alone
// may collide ("A" and "a", long ids); the hash suffix keeps the mapping
// one-to-one (provider ids contain no NUL, Config.Validate refuses it, so
// the hashed string splits back unambiguously). A retried Create for the same
// machine derives the same name and finds its own domain.
func DomainName(provider, machineID string) string {
	sum := sha256.Sum256([]byte(provider + "\x00" + machineID))
	return NamePrefix(provider) + Sanitize(machineID, maxMachinePart) + "-" + hex.EncodeToString(sum[:4])
}

// NamePrefix is the part all of one provider's domain names share; Inventory
// uses it to skip foreign domains without reading their metadata.
func NamePrefix(provider string) string {
	return "bf-" + Sanitize(provider, maxProviderPart) + "-"
}

// Sanitize lowercases s, maps every run of characters outside [a-z0-9] to
// one '-', trims dashes and truncates to max. An empty result becomes "x"
// so the name keeps its shape.
func Sanitize(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := b.String()
	if len(out) > max {
		out = out[:max]
	}
	out = strings.Trim(out, "-")
	if out == "" {
		return "x"
	}
	return out
}

// OverlayName and SeedName are the volumes a domain owns in the pool.
func OverlayName(domain string) string { return domain + ".qcow2" }
func SeedName(domain string) string    { return domain + "-seed.iso" }
