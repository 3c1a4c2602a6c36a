package record

import "strings"

// addressesNote prefixes the guest's addresses in a Configure's history
// entry (Transition.Note), which the store keeps with the machine.
const addressesNote = "addresses: "

// NoteAddresses is the history note of a Configure that read addresses.
func NoteAddresses(addrs []string) string {
	if len(addrs) == 0 {
		return ""
	}
	return addressesNote + strings.Join(addrs, ", ")
}

// GuestAddresses are the guest's addresses as its latest successful
// Configure read them ("eth0 192.0.2.10/24"), from that transition's
// history entry, so they persist with the history and need no field of
// their own in the store's record. Nil while unknown: never configured
// since its Create, the reading failed, or the agent refused it. For
// people (admin API, libvirtctl): BigFleet's wire has no field for them.
func (m *Machine) GuestAddresses() []string {
	for i := len(m.History) - 1; i >= 0; i-- {
		h := &m.History[i]
		switch {
		case h.Kind == OpCreate, (h.Kind == OpDelete || h.Kind == OpRelease) && h.Outcome == "succeeded":
			return nil // a new VM or none: an earlier life's addresses are not its
		case h.Kind == OpConfigure && h.Outcome == "succeeded":
			s, ok := strings.CutPrefix(h.Note, addressesNote)
			if !ok || s == "" {
				return nil
			}
			return strings.Split(s, ", ")
		}
	}
	return nil
}
