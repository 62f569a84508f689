package policy

import (
	"fmt"
	"strings"
)

// Narrow returns the destinations asked for, each one checked to lie
// within one of allowed: a caller may take away from a tool's egress,
// never add to it. A name must be one allowed by name or fall under an
// allowed wildcard; an IP range must lie inside an allowed range; every
// port must be allowed there; a private destination needs a private
// allowed one. What a destination inherits (pinned addresses of the same
// name, opaque, private) comes from the allowed one that covers it.
func Narrow(allowed []Destination, asked []string) ([]Destination, error) {
	out := make([]Destination, 0, len(asked))
	for _, s := range asked {
		d, err := Compile(Spec{Host: s})
		if err != nil {
			// A private range, say: compiled as such, it must then be
			// within a private allowed destination.
			var perr error
			if d, perr = Compile(Spec{Host: s, Private: true}); perr != nil {
				return nil, err
			}
		}
		a, ok := covering(allowed, d)
		if !ok {
			return nil, fmt.Errorf("%w: %q is not within the tool's egress; a sandbox's egress may only be narrowed", ErrInvalid, s)
		}
		// The allowed one's options: the same destination, or part of it.
		d.Opaque, d.Private = a.Opaque, a.Private
		if !a.Wildcard && a.Name != "" && a.Name == d.Name {
			d.Addresses = a.Addresses
		}
		out = append(out, d)
	}
	return out, nil
}

func covering(allowed []Destination, d Destination) (Destination, bool) {
	for _, a := range allowed {
		if covers(a, d) {
			return a, true
		}
	}
	return Destination{}, false
}

// covers reports whether every connection d allows, a allows too.
func covers(a, d Destination) bool {
	if d.Private && !a.Private {
		return false
	}
	for _, p := range d.Ports {
		found := false
		for _, q := range a.Ports {
			found = found || p == q
		}
		if !found {
			return false
		}
	}
	switch {
	case a.Name != "" && d.Name != "":
		if !a.Wildcard {
			return !d.Wildcard && d.Name == a.Name
		}
		return strings.HasSuffix(d.Name, "."+a.Name) || (d.Wildcard && d.Name == a.Name)
	case a.Prefix.IsValid() && d.Prefix.IsValid():
		return a.Prefix.Addr().Is4() == d.Prefix.Addr().Is4() && a.Prefix.Bits() <= d.Prefix.Bits() && a.Prefix.Contains(d.Prefix.Addr())
	}
	return false
}
