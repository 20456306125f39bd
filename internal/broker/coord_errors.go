package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kaas-dev/kaas/internal/coord"
)

// coordError is the one table mapping coordination errors to Kafka codes.
func coordError(err error) *kerr.Error {
	var code coord.CodeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &code):
		return kerr.ErrorForCode(int16(code)).(*kerr.Error)
	case errors.Is(err, coord.ErrNotCoordinator):
		return kerr.NotCoordinator
	case errors.Is(err, coord.ErrNotAvailable):
		return kerr.CoordinatorNotAvailable
	case errors.Is(err, coord.ErrLoadInProgress):
		return kerr.CoordinatorLoadInProgress
	case errors.Is(err, coord.ErrInvalidGroupID):
		return kerr.InvalidGroupID
	case errors.Is(err, coord.ErrGroupNotFound):
		return kerr.GroupIDNotFound
	case errors.Is(err, coord.ErrNonEmptyGroup):
		return kerr.NonEmptyGroup
	case errors.Is(err, coord.ErrIllegalGeneration):
		return kerr.IllegalGeneration
	case errors.Is(err, coord.ErrSubscribedToTopic):
		return kerr.GroupSubscribedToTopic
	case errors.Is(err, coord.ErrCoordinatorLoadError):
		// The offsets file could not be read or written: retriable for the
		// client, and never reported as success.
		return kerr.CoordinatorNotAvailable
	}
	return kerr.UnknownServerError
}
