package cli

import (
	"errors"
	"flag"
	"fmt"
)

// ParseNoArgs parses the flags of a command that takes no arguments. done
// is true when the command should end now, with err (nil after -h).
func ParseNoArgs(fs *flag.FlagSet, args []string, stdio IO) (done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return true, &ExitError{Code: 2}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stdio.Stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return true, &ExitError{Code: 2}
	}
	return false, nil
}
