package fence

// NewerThanMark reports whether the token (epoch, seq) is strictly newer
// than mark m, comparing (epoch, sequence) lexicographically: the one rule
// of the fence. Plain comparisons: no arithmetic, so int64 max values
// cannot overflow.
func NewerThanMark(m Mark, epoch, seq int64) bool {
	return epoch > m.Epoch || (epoch == m.Epoch && seq > m.Sequence)
}
