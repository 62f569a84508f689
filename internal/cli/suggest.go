package cli

import (
	"flag"
	"strings"
)

// unknownFlag returns the first flag of args that fs does not define, as
// the flag package reads them (it stops at "--" or the first argument that
// is not a flag), or "". It is read again here because the flag package
// says which only in its error's text.
func unknownFlag(fs *flag.FlagSet, args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			return ""
		}
		name, hasValue := strings.TrimLeft(a, "-"), false
		if n, _, ok := strings.Cut(name, "="); ok {
			name, hasValue = n, true
		}
		f := fs.Lookup(name)
		if f == nil {
			if name == "h" || name == "help" {
				return ""
			}
			return name
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // the flag's value
		}
	}
	return ""
}

// didYouMean is " (did you mean --memory?)" for a flag name close to one
// of fs's (a typo: at most two letters added, dropped, changed or, as in
// "memroy", swapped), or "".
func didYouMean(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) < 3 {
			return // -t, -i: any short typo would be near them
		}
		if d := editDistance(strings.ToLower(name), f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" || bestD*3 > len(best) {
		return ""
	}
	return " (did you mean --" + best + "?)"
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of neighbours, one each.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
