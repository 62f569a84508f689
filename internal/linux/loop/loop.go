// Package loop attaches a file to a loop block device, so that a file
// system held in a file (a volume's) can be mounted. Only the kernel's
// ioctls are used: no losetup, no cgo.
package loop

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// maxTries bounds the retries of a free device another process took
// between the kernel naming it and this one configuring it.
const maxTries = 16

// Attach attaches file to a free loop device and returns the device,
// open. The device detaches itself once it is closed and nothing has it
// mounted (autoclear): the caller mounts it, then closes it.
func Attach(file string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		// A /dev without the node (a container's, a minimal system's):
		// made, as udev would; opening it has the kernel load the loop
		// module if it can.
		if err := unix.Mknod("/dev/loop-control", unix.S_IFCHR|0o660, int(unix.Mkdev(10, 237))); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("loop: /dev/loop-control: %w", err)
		}
		ctl, err = os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("loop: %w (is the kernel's loop module loaded?)", err)
	}
	defer ctl.Close()
	backing, err := os.OpenFile(file, os.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("loop: %w", err)
	}
	defer backing.Close()
	for range maxTries {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("loop: no free device: %w", err)
		}
		path := fmt.Sprintf("/dev/loop%d", n)
		dev, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) {
			// A container's /dev may lack the node the kernel made.
			if err := unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, fmt.Errorf("loop: %s: %w", path, err)
			}
			dev, err = os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("loop: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("loop: configure %s: %w", path, err)
		}
	}
	return nil, errors.New("loop: every free device was taken before it could be configured")
}
