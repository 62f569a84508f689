package route_test

import (
	"fmt"

	"github.com/airlockhq/airlock/internal/broker/route"
)

func Example() {
	op, err := route.ParseTemplate("GET", "/repos/{owner}/{repo}/issues",
		map[string]string{"owner": "[a-z0-9-]+"})
	if err != nil {
		panic(err)
	}
	for _, raw := range []string{
		"/repos/octo-org/hello%2Dworld/issues",
		"/repos/octo-org/x/..%2F..%2Fadmin",
	} {
		segs, err := route.Normalize(raw)
		if err != nil {
			fmt.Println(err)
			continue
		}
		vals, ok := op.Match("GET", segs)
		fmt.Println(ok, vals["owner"], vals["repo"], route.Join(segs))
	}
	// Output:
	// true octo-org hello-world /repos/octo-org/hello-world/issues
	// suspicious path "/repos/octo-org/x/..%2F..%2Fadmin": encoded slash (%2F)
}
