package cli

import (
	"fmt"
	"strings"
)

// completionCommands are the commands completed after "airlock".
var completionCommands = []string{"run", "serve", "front", "session", "snapshot", "volume", "pool", "ps", "kill", "reload", "console", "audit", "policy", "mcp", "image", "config", "doctor", "version", "help", "completion"}

// HelpTopics are the topics of `airlock help TOPIC` (airlockd's: their
// text is in docs/, which airlock does not carry), for the usage and the
// completion; a test of airlockd's holds the two lists together.
var HelpTopics = []string{"config", "limits", "egress", "broker", "server", "images", "mcp", "api", "e2b", "cluster"}

// completionSubs are the subcommands of the commands that have them.
var completionSubs = map[string]string{
	"session":    "create ls exec cp show rm",
	"image":      "import pull build ls inspect rm gc",
	"pool":       "ls",
	"config":     "check",
	"help":       strings.Join(HelpTopics, " "),
	"completion": "bash zsh fish",
}

// bashCompletion completes commands and subcommands from the lists
// above, flags from the command's own -h, so they never drift, and the
// value of --tool from the tools `airlock config check` lists (of the
// --config on the line, else the default file). In -h, a one-letter
// flag (-t) is completed as it is written, a longer one with two dashes.
const bashCompletion = `# airlock completion for bash: source <(airlock completion bash)
_airlock() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=${COMP_WORDS[1]} sub=""
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "%s" -- "$cur"))
		return
	fi
	if [[ $prev == --tool || $prev == -tool ]]; then
		local cfg=() i
		for ((i = 2; i < COMP_CWORD - 1; i++)); do
			case ${COMP_WORDS[i]} in --config | -config) cfg=(--config "${COMP_WORDS[i+1]}") ;; esac
		done
		COMPREPLY=($(compgen -W "$(airlock config check "${cfg[@]}" 2>/dev/null | sed -n 's/^tool \([^: ]*\).*/\1/p')" -- "$cur"))
		return
	fi
	case "$cmd" in
%s	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(airlock $cmd $sub -h 2>&1 | sed -n -e 's/^  -\([a-z]\)\([^a-z-].*\)\{0,1\}$/-\1/p' -e 's/^  -\([a-z][a-z-]\{1,\}\).*/--\1/p')" -- "$cur"))
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
		fmt.Fprintln(stdio.Stdout, `complete -c airlock -l tool -x -a '(airlock config check 2>/dev/null | string replace -rf "^tool ([^: ]+).*" "$1")'`)
	default:
		return UsageError(stdio.Stderr, "airlock completion", "no completion for %q (bash, zsh or fish)", args[0])
	}
	return nil
}
