package apierr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err        error
		wantStatus int
		wantCode   string
	}{
		{errdefs.New(errdefs.ErrInvalid, "bad field"), 400, api.CodeInvalid},
		{fmt.Errorf("open: %w", errdefs.ErrNotFound), 404, api.CodeNotFound},
		{errdefs.New(errdefs.ErrDenied, "no"), 403, api.CodeForbidden},
		{errdefs.New(errdefs.ErrConflict, "ended"), 409, api.CodeEnded},
		{errdefs.New(errdefs.ErrLimit, "too big"), 413, api.CodeTooLarge},
		{errdefs.New(errdefs.ErrUnavailable, "later"), 503, api.CodeUnavailable},
		{errors.New("boom"), 500, api.CodeInternal},
	}
	for _, tt := range tests {
		status, code := StatusOf(tt.err)
		if status != tt.wantStatus || code != tt.wantCode {
			t.Errorf("StatusOf(%v) = %d %s, want %d %s", tt.err, status, code, tt.wantStatus, tt.wantCode)
		}
	}
}
