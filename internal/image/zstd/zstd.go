// Package zstd opens zstd streams for the image store. It is a package
// apart so that only the programs that import images (airlockd, through
// image.RegisterZstd) link the decoder and run its package initialisers
// at start; airlock itself does not.
package zstd

import (
	"io"

	"github.com/klauspost/compress/zstd"
)

// maxWindow caps the window a stream may ask for: the decoder allocates
// it up front, and an archive is untrusted input. zstd's own tool writes
// at most 128 MiB windows (--long=27).
const maxWindow = 128 << 20

// Open returns r decompressed.
func Open(r io.Reader) (io.ReadCloser, error) {
	d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return nil, err
	}
	return d.IOReadCloser(), nil
}
