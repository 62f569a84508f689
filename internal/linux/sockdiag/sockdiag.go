// Package sockdiag reads how much socket buffer memory the TCP sockets of
// a network namespace hold, from the kernel's sock_diag netlink interface
// (what ss -m shows). airlock uses it for the memory no cgroup is charged:
// the kernel charges a socket's buffers to the cgroup of the process that
// created or accepted it, so a connection a listener has not accepted yet
// belongs to no cgroup, and data queued on it counts in the host's TCP
// memory (net.ipv4.tcp_mem) alone.
package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/airlockhq/airlock/internal/linux/netns"
	"golang.org/x/sys/unix"
)

// Usage is the socket buffer memory of the TCP sockets of a range of host
// uids in one network namespace, in bytes: data received and not read,
// data queued to send, and what the kernel reserved ahead for each.
type Usage struct {
	// Bytes is every such socket's.
	Bytes int64
	// Unheld is that of the connections not accepted yet: no process
	// holds a descriptor of them (the kernel reports inode 0), and they
	// are open (a connection closed with data still queued has no
	// descriptor either, but was charged to its cgroup).
	Unheld int64
	// Sockets counts the sockets read.
	Sockets int
}

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	inetDiagSKMem    = 7  // INET_DIAG_SKMEMINFO
	reqLen           = 56 // struct inet_diag_req_v2
	msgLen           = 72 // struct inet_diag_msg
	// offsets in struct inet_diag_msg
	offState = 1
	offUID   = 64
	offInode = 68
	// TCP states a connection not accepted yet may be in (a Fast Open
	// one is in SYN_RECV with data; one whose client closed, CLOSE_WAIT).
	stateEstablished = 1
	stateSynRecv     = 3
	stateCloseWait   = 8
	stateListen      = 10
	stateBound       = 13 // TCP_BOUND_INACTIVE: bound, neither listening nor connected (Linux 6.6)
	// Every state a socket with buffers may be in: all but LISTEN and
	// BOUND_INACTIVE. A listener holds no buffers of its own (its
	// connections not accepted yet are sockets of their own, in the table
	// of established connections), nor does a socket only bound; asking
	// for either makes the kernel walk a table every namespace shares with
	// the host's (of listeners, of bound ports), whose size is the host's:
	// 0.1–0.3 ms a reading here, where a namespace's own table of
	// established connections takes microseconds.
	readStates = 0b1_1011_1111_1110 // states 1 to 9 (ESTABLISHED to LAST_ACK), 11 (CLOSING) and 12 (NEW_SYN_RECV)
)

// Families says which of a namespace's TCP sockets TCP reads.
type Families uint8

const (
	IPv4 Families = 1 << iota
	IPv6
	Both = IPv4 | IPv6
)

// TCP reads the usage of the TCP sockets of families in namespace ns
// whose owner is a host uid from lo to hi. Each family costs a walk of
// the namespace's table of established connections.
func TCP(ns *os.File, lo, hi uint32, families Families) (Usage, error) {
	var fd int
	err := netns.Do(ns, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		return err
	})
	if err != nil {
		return Usage{}, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	var u Usage
	for _, f := range []struct {
		bit    Families
		family uint8
	}{{IPv4, unix.AF_INET}, {IPv6, unix.AF_INET6}} {
		if families&f.bit == 0 {
			continue
		}
		if err := dump(fd, f.family, lo, hi, &u); err != nil {
			return u, err
		}
	}
	return u, nil
}

// dump asks for the TCP sockets of family (but listeners) and adds those
// of owners lo to hi to u.
func dump(fd int, family uint8, lo, hi uint32, u *Usage) error {
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], uint32(family)) // sequence number
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1], r[2] = family, unix.IPPROTO_TCP, 1<<(inetDiagSKMem-1)
	ne.PutUint32(r[4:], readStates)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag: send: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("sock_diag: receive: %w", err)
		}
		done, err := parse(buf[:n], lo, hi, u)
		if err != nil || done {
			return err
		}
	}
}

// parse adds the sockets of one netlink answer to u, and reports whether
// it ended the dump.
func parse(b []byte, lo, hi uint32, u *Usage) (bool, error) {
	ne := binary.NativeEndian
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(ne.Uint32(b[0:]))
		typ := ne.Uint16(b[4:])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return true, errors.New("sock_diag: malformed answer")
		}
		body := b[unix.NLMSG_HDRLEN:l]
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if e := int32(ne.Uint32(body)); e != 0 {
					return true, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
				}
			}
			return true, nil
		case sockDiagByFamily:
			if len(body) >= msgLen {
				add(body, lo, hi, u)
			}
		}
		b = b[min(nlmAlign(l), len(b)):]
	}
	return false, nil
}

// add adds one inet_diag_msg with its attributes to u, when its owner is
// in range.
func add(m []byte, lo, hi uint32, u *Usage) {
	ne := binary.NativeEndian
	uid, inode := ne.Uint32(m[offUID:]), ne.Uint32(m[offInode:])
	unaccepted := inode == 0 && (m[offState] == stateEstablished || m[offState] == stateSynRecv || m[offState] == stateCloseWait)
	if uid < lo || uid > hi {
		return
	}
	u.Sockets++
	for a := m[msgLen:]; len(a) >= 4; {
		l, typ := int(ne.Uint16(a[0:])), ne.Uint16(a[2:])
		if l < 4 || l > len(a) {
			return
		}
		if typ == inetDiagSKMem && l >= 4+4*(unix.SK_MEMINFO_WMEM_QUEUED+1) {
			v := func(i int) int64 { return int64(int32(ne.Uint32(a[4+4*i:]))) }
			n := v(unix.SK_MEMINFO_RMEM_ALLOC) + v(unix.SK_MEMINFO_WMEM_QUEUED) + v(unix.SK_MEMINFO_FWD_ALLOC)
			u.Bytes += n
			if unaccepted {
				u.Unheld += n
			}
		}
		a = a[min(nlmAlign(l), len(a)):]
	}
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }
