package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// Terminal is the user's terminal, for a command with one of its own in
// the sandbox (run -t, session exec -t): in raw mode while the command
// runs, so that every key (Ctrl-C and Ctrl-D too) goes to the sandbox's
// terminal, which does what a terminal does with it; its window changes
// follow.
type Terminal struct {
	in         *os.File
	fd         int
	Rows, Cols uint16

	mu   sync.Mutex // guards old and stop
	old  *unix.Termios
	stop func()
}

// ErrNoTerminal is the refusal of --tty when standard input is not a
// terminal.
var ErrNoTerminal = errors.New("--tty needs a terminal on standard input (leave it out to pipe input in)")

// OpenTerminal returns stdin as a Terminal, with its size now.
func OpenTerminal(stdin io.Reader) (*Terminal, error) {
	f, ok := stdin.(*os.File)
	if !ok {
		return nil, ErrNoTerminal
	}
	fd := int(f.Fd())
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return nil, ErrNoTerminal
	}
	return &Terminal{in: f, fd: fd, Rows: ws.Row, Cols: ws.Col}, nil
}

// Raw puts the terminal in raw mode and calls resize with each new window
// size until Restore.
func (t *Terminal) Raw(resize func(rows, cols uint16)) error {
	old, err := unix.IoctlGetTermios(t.fd, unix.TCGETS)
	if err != nil {
		return err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(t.fd, unix.TCSETS, &raw); err != nil {
		return err
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, unix.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-winch:
				if ws, err := unix.IoctlGetWinsize(t.fd, unix.TIOCGWINSZ); err == nil && resize != nil {
					resize(ws.Row, ws.Col)
				}
			case <-done:
				return
			}
		}
	}()
	t.mu.Lock()
	t.old = old
	t.stop = func() { signal.Stop(winch); close(done) }
	t.mu.Unlock()
	return nil
}

// Restore puts the terminal back as Raw found it; it may be called more
// than once.
func (t *Terminal) Restore() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.old == nil {
		return
	}
	_ = unix.IoctlSetTermios(t.fd, unix.TCSETS, t.old)
	t.stop()
	t.old, t.stop = nil, nil
}

// CRLF writes to w with each "\n" as "\r\n": airlock's own lines on a
// terminal in raw mode, which no longer returns the carriage itself.
type CRLF struct{ W io.Writer }

func (c CRLF) Write(b []byte) (int, error) {
	if _, err := c.W.Write(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(b), nil
}
