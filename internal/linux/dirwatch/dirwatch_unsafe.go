package dirwatch

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyEvent is the header of the inotify record at the start of b,
// which the caller has checked holds at least unix.SizeofInotifyEvent
// bytes. The kernel writes whole records, each aligned for its header.
func inotifyEvent(b []byte) *unix.InotifyEvent {
	return (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
}
