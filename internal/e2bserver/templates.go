package e2bserver

import (
	"net/http"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/node"
)

// errNoBuild answers every call of E2B's template builds (the SDKs'
// Template.build): airlock's templates are the config's tools.
// Refused by name, not with a bare 404, so that an integration that
// builds a template of its own when none is named (Mastra's E2BSandbox)
// says what to do instead.
var errNoBuild = errdefs.Errorf(errUnsupported, "airlock does not build templates: a template is a tool of the config (an image), by its name or a name in its e2b_templates; name one as the template (docs/e2b.md)")

// e2bTemplateRoutes refuses the template build calls; api is
// e2bRoutes' wrapper of a control-plane call (a call without a valid API
// key is refused for that first).
func (d *Server) e2bTemplateRoutes(mux *http.ServeMux, api func(func(http.ResponseWriter, *http.Request, *node.Caller) error) http.HandlerFunc) {
	refuse := api(func(http.ResponseWriter, *http.Request, *node.Caller) error { return errNoBuild })
	for _, p := range []string{
		"POST /templates",
		"POST /v2/templates",
		"POST /v3/templates",
		"POST /templates/{id}",
		"POST /v2/templates/{id}/builds/{build}",
		"GET /templates/{id}/files/{hash}",
		"GET /templates/{id}/builds/{build}/status",
	} {
		mux.HandleFunc(p, refuse)
	}
}
