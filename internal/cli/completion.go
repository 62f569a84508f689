package cli

import (
	"fmt"
	"strings"
)

// completionCommands are the commands completed after "airlock".
var completionCommands = []string{"run", "serve", "front", "session", "pool", "ps", "kill", "audit", "mcp", "image", "config", "doctor", "version", "help", "completion"}

// completionSubs are the subcommands of the commands that have them.
var completionSubs = map[string]string{
	"session":    "create ls exec cp show rm",
	"image":      "import pull ls inspect rm gc",
	"pool":       "ls",
	"config":     "check",
	"help":       "config limits egress broker server images mcp api",
	"completion": "bash zsh fish",
}

// bashCompletion completes commands and subcommands from the lists
// above, and flags from the command's own -h, so they never drift.
const bashCompletion = `# airlock completion for bash: source <(airlock completion bash)
_airlock() {
	local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} sub=""
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "%s" -- "$cur"))
		return
	fi
	case "$cmd" in
%s	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(airlock $cmd $sub -h 2>&1 | sed -n 's/^  -\([a-z][a-z-]*\).*/--\1/p')" -- "$cur"))
	fi
}
complete -o default -F _airlock airlock
`

// completion is "airlock completion SHELL".
func completion(args []string, stdio IO) error {
	if len(args) != 1 {
		return UsageError(stdio.Stderr, "airlock completion", "name one shell: bash, zsh or fish")
	}
	var cases strings.Builder
	for _, c := range completionCommands {
		subs, ok := completionSubs[c]
		if !ok {
			continue
		}
		fmt.Fprintf(&cases, "\t%s)\n\t\tif [ \"$COMP_CWORD\" -eq 2 ]; then COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return; fi\n\t\tsub=${COMP_WORDS[2]};;\n", c, subs)
	}
	bash := fmt.Sprintf(bashCompletion, strings.Join(completionCommands, " "), cases.String())
	switch args[0] {
	case "bash":
		fmt.Fprint(stdio.Stdout, bash)
	case "zsh":
		fmt.Fprint(stdio.Stdout, "# airlock completion for zsh: source <(airlock completion zsh)\nautoload -U +X bashcompinit && bashcompinit\n"+strings.SplitN(bash, "\n", 2)[1])
	case "fish":
		fmt.Fprintln(stdio.Stdout, "# airlock completion for fish: airlock completion fish | source")
		fmt.Fprintf(stdio.Stdout, "complete -c airlock -f -n __fish_use_subcommand -a '%s'\n", strings.Join(completionCommands, " "))
		for _, c := range completionCommands {
			if subs, ok := completionSubs[c]; ok {
				fmt.Fprintf(stdio.Stdout, "complete -c airlock -f -n '__fish_seen_subcommand_from %s' -a '%s'\n", c, subs)
			}
		}
	default:
		return UsageError(stdio.Stderr, "airlock completion", "no completion for %q (bash, zsh or fish)", args[0])
	}
	return nil
}
