// Package docs holds airlock's documentation, embedded so that
// `airlock help TOPIC` prints the same text as these files.
package docs

import "embed"

// FS holds the Markdown files of this directory.
//
//go:embed *.md
var FS embed.FS
