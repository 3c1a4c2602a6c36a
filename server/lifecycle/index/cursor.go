package index

import (
	"encoding/binary"
	"hash/crc32"
)

// A cursor is version(1) | store id(8) | revision(8) | crc32(4). The store id
// makes a cursor from another store foreign; the checksum makes a mutated
// cursor garbage. Both mean "no cursor": a full list, never an error.
const (
	cursorVersion = 1
	cursorLen     = 1 + 8 + 8 + 4
)

var cursorTable = crc32.MakeTable(crc32.Castagnoli)

// EncodeCursor is the cursor of revision rev of store storeID.
func EncodeCursor(storeID, rev uint64) []byte {
	b := make([]byte, cursorLen)
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], storeID)
	binary.BigEndian.PutUint64(b[9:17], rev)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[:17], cursorTable))
	return b
}

// DecodeCursor returns the revision a cursor carries, or ok=false when the
// cursor is absent, malformed, mutated or from another store.
func DecodeCursor(b []byte, storeID uint64) (rev uint64, ok bool) {
	if len(b) != cursorLen || b[0] != cursorVersion {
		return 0, false
	}
	if crc32.Checksum(b[:17], cursorTable) != binary.BigEndian.Uint32(b[17:]) {
		return 0, false
	}
	if binary.BigEndian.Uint64(b[1:9]) != storeID {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[9:17]), true
}
