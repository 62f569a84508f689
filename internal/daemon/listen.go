package daemon

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// listenUnixMode listens on a unix socket at path with the given mode.
// The mode is set between bind and listen, while nothing can connect yet
// (a connect to a socket that is not listening is refused), so there is
// no window in which others could connect. The process umask is left
// alone: it is process-wide, and a child started meanwhile (the spawner,
// and through it every sandbox's init) would inherit a changed one.
func listenUnixMode(path string, mode os.FileMode) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		os.Remove(path)
		return nil, err
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		os.Remove(path)
		return nil, os.NewSyscallError("listen", err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return ln, nil
}
