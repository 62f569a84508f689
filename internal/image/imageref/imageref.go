// Package imageref holds the rules of what names an image in airlock's image
// store: names, digests, and the embedded image's name, which no stored
// image may take. Package config checks a tool's image against them when
// it reads a file, and the store when it imports and resolves; this
// package links only the standard library, so config need not link the
// store (which brings the kernel packages of idmapped mounts).
package imageref

import (
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// ErrInvalid is the class of every error here; package image's ErrInvalid
// is the same value.
var ErrInvalid = errdefs.New(errdefs.ErrInvalid, "invalid")

// Host is the embedded default image's name: the host's own system
// directories. It is never in the store.
const Host = "host"

// IsDigest reports whether ref is sha256: and 64 lower-case hex digits.
// (Checked by hand, as the name below, not with a regular expression:
// compiling one costs every airlock process, inits included, about a
// millisecond at start.)
func IsDigest(ref string) bool {
	hex, ok := strings.CutPrefix(ref, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// isName reports whether n may be an image name: 1 to 255 of lower-case
// letters, digits and . _ / : @ -, starting with a letter or digit.
// Registry references fit ("docker.io/library/python:3.12").
func isName(n string) bool {
	if len(n) == 0 || len(n) > 255 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && strings.IndexByte("._/:@-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// CheckName validates an image name.
func CheckName(n string) error {
	switch {
	case n == Host:
		return fmt.Errorf("%w: %q is the embedded host image and cannot name a stored one", ErrInvalid, n)
	case strings.HasPrefix(n, "sha256:"):
		return fmt.Errorf("%w: name %q looks like a digest", ErrInvalid, n)
	case !isName(n):
		return fmt.Errorf("%w: image name %q: want lower-case letters, digits and . _ / : @ - (at most 255, starting with a letter or digit)", ErrInvalid, n)
	}
	return nil
}

// Check validates an image reference: a name or a digest.
func Check(ref string) error {
	if IsDigest(ref) {
		return nil
	}
	if strings.HasPrefix(ref, "sha256:") {
		return fmt.Errorf("%w: digest %q: want sha256: and 64 hex digits", ErrInvalid, ref)
	}
	return CheckName(ref)
}
