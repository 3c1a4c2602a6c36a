package guestagent

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultTailBytes bounds how much hook output goes into an error: enough to
// show why a hook failed, small enough for last_error and a log line.
const DefaultTailBytes = 512

// Tail returns the last n bytes of out as one printable line: valid UTF-8
// (a rune cut by the boundary is dropped), newlines and tabs turned into
// spaces, other control characters (terminal escapes) removed. Output that
// was cut gets a leading "…".
func Tail(out []byte, n int) string {
	if n <= 0 {
		n = DefaultTailBytes
	}
	cut := len(out) > n
	if cut {
		out = out[len(out)-n:]
	}
	// Skip continuation bytes of a rune split by the cut.
	for cut && len(out) > 0 && !utf8.RuneStart(out[0]) {
		out = out[1:]
	}
	s := strings.ToValidUTF8(string(out), "")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError:
			return -1
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if cut && s != "" {
		s = "…" + s
	}
	return s
}
