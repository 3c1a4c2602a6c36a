package config

import (
	"fmt"
	"net/url"
	"strings"
)

// connectNames names the hosts of --connect: a zone's only host is named
// after the zone (its placements keep the "zone/domain" ref); the hosts
// of a zone named several times get a name derived from their URI (the
// host part, or for a local URI the zone plus the socket or path), made
// unique with a numeric suffix, and their placements carry it.
func connectNames(hosts []Host) {
	perZone := map[string]int{}
	for _, h := range hosts {
		perZone[h.Zone]++
	}
	used := map[string]bool{}
	for i := range hosts {
		if perZone[hosts[i].Zone] == 1 {
			hosts[i].Name = hosts[i].Zone
			used[hosts[i].Name] = true
		}
	}
	for i := range hosts {
		h := &hosts[i]
		if perZone[h.Zone] == 1 {
			continue
		}
		base := uriName(h.Zone, h.URI)
		name := base
		for n := 2; used[name]; n++ {
			name = fmt.Sprintf("%s-%d", base, n)
		}
		h.Name, h.Named = name, true
		used[name] = true
	}
}

// uriName derives a host name from a URI: its host part ("kvm-a1.example"),
// else the zone and the socket parameter or path ("zone-a-run-user-1001-
// libvirt-libvirt-sock"), lower-cased, with anything but letters, digits,
// '.' and '-' turned into '-'. Never credentials: no userinfo, and of the
// query only the socket path.
func uriName(zone, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return zone
	}
	if host := u.Hostname(); host != "" {
		if p := u.Port(); p != "" {
			host += "-" + p
		}
		return clean(host)
	}
	where := u.Path
	if sock := u.Query().Get("socket"); sock != "" {
		where = sock
	}
	return clean(zone + "-" + where)
}

func clean(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.'
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-.")
}
