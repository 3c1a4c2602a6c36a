// Package rollback is the undo stack of one attempt that makes several
// pieces on a host (a Create's volumes and domain, a migration's
// destination volumes): each piece pushes the step that removes it, and a
// failed attempt runs them newest first, removing exactly what it made.
package rollback

import (
	"errors"
	"fmt"
	"log/slog"
)

// Stack is the list of undo steps of one attempt. The zero value is empty
// and ready; assigning Stack{} drops every step (the pieces are kept).
type Stack struct {
	steps []step
}

type step struct {
	what string
	fn   func() error
}

// Push adds the step that undoes what; it runs before every step pushed
// earlier.
func (s *Stack) Push(what string, fn func() error) {
	s.steps = append(s.steps, step{what, fn})
}

// Len is the number of steps pushed.
func (s *Stack) Len() int { return len(s.steps) }

// Run undoes newest first and keeps going past failures so as much as
// possible is cleaned; it reports what it could not undo, each failure
// named by its step.
func (s *Stack) Run(log *slog.Logger) error {
	var errs []error
	for i := len(s.steps) - 1; i >= 0; i-- {
		st := s.steps[i]
		if err := st.fn(); err != nil {
			log.Warn("create rollback step failed", "step", st.what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", st.what, err))
			continue
		}
		log.Info("create rolled back", "step", st.what)
	}
	return errors.Join(errs...)
}
