package daemoncmd

import (
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/cli"
)

// TestHelpTopicsListed: the usage and the completion (airlock's, which
// does not carry the topics' text) list every topic of airlock help.
func TestHelpTopicsListed(t *testing.T) {
	var got []string
	for n := range helpTopics {
		got = append(got, n)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(cli.HelpTopics))
	if !slices.Equal(got, want) {
		t.Errorf("help topics %v, cli.HelpTopics %v", got, want)
	}
}
