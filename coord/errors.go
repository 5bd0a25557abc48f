package coord

import "errors"

var (
	// ErrNotHeld reports a release, extension or refresh by a caller that
	// does not hold the lock, lease or permit: it expired, was already
	// released, or belongs to another owner. Nothing was changed.
	ErrNotHeld = errors.New("hourglass: not held")

	// ErrNotAcquired reports a TryAcquire (or TryAcquireRead/Write) that
	// found the lock held or no permit free. Nothing was taken.
	ErrNotAcquired = errors.New("hourglass: not acquired")
)
