package gvisor

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// Container is what airlock puts in one gVisor sandbox: the container of
// an OCI bundle, as much of it as airlock uses. Config renders it.
type Container struct {
	// Root is the host directory that is the container's root, served
	// read-only unless RootWritable.
	Root         string
	RootWritable bool
	// Args, Env and Cwd are the container's process: airlock's init, or
	// a one-command sandbox's command. Args[0] is an absolute path unless
	// PathLookup, when the guest kernel looks it up as execvp would (in
	// Env's PATH; below Cwd when it holds a slash).
	Args       []string
	PathLookup bool
	Env        []string
	Cwd        string
	// UID and GID are the process's ids (real, effective and saved); it
	// has no supplementary groups.
	UID, GID uint32
	// Caps are the only capabilities the process has after its exec, as
	// "CAP_SETUID": ambient ones (and so inheritable, permitted and
	// effective), which an exec as a uid other than 0 keeps. Its bounding
	// set is empty: no exec gains one it has not.
	Caps     []string
	Rlimits  []Rlimit
	Hostname string
	Mounts   []Mount
	// IDBase and IDSize are the host id range the sandbox's ids 0.. map
	// onto: the gVisor sandbox's own processes (the sentry and the gofer)
	// run as its uid 0, which is IDBase on the host.
	IDBase, IDSize uint32
	// NetNS is the path of the network namespace the sandbox joins; with
	// runsc's host network, the guest's sockets are the host kernel's
	// sockets in that namespace.
	NetNS string
	// MemoryBytes, when set, is what the guest is told its memory is.
	MemoryBytes int64
}

// Rlimit is one of the process's resource limits, by its name
// ("RLIMIT_NOFILE").
type Rlimit struct {
	Type       string
	Soft, Hard uint64
}

// Mount is one mount of the container. Type "bind" serves a host
// directory or file (Source) through runsc's gofer; "proc", "sysfs" and
// "tmpfs" are the guest kernel's own.
type Mount struct {
	Destination, Source, Type string
	ReadOnly                  bool
	// Options are the file system's options (a tmpfs's "size=...").
	Options []string
}

// The OCI runtime specification's shapes, as far as Config fills them.
type (
	ociSpec struct {
		Version  string     `json:"ociVersion"`
		Process  ociProcess `json:"process"`
		Root     ociRoot    `json:"root"`
		Hostname string     `json:"hostname,omitempty"`
		Mounts   []ociMount `json:"mounts"`
		Linux    ociLinux   `json:"linux"`
	}
	ociProcess struct {
		User            ociUser     `json:"user"`
		Args            []string    `json:"args"`
		Env             []string    `json:"env"`
		Cwd             string      `json:"cwd"`
		Capabilities    ociCaps     `json:"capabilities"`
		Rlimits         []ociRlimit `json:"rlimits,omitempty"`
		NoNewPrivileges bool        `json:"noNewPrivileges"`
	}
	ociUser struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	}
	ociCaps struct {
		Bounding    []string `json:"bounding"`
		Effective   []string `json:"effective"`
		Permitted   []string `json:"permitted"`
		Inheritable []string `json:"inheritable"`
		Ambient     []string `json:"ambient"`
	}
	ociRlimit struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	ociLinux struct {
		Namespaces  []ociNamespace `json:"namespaces"`
		UIDMappings []ociIDMap     `json:"uidMappings"`
		GIDMappings []ociIDMap     `json:"gidMappings"`
		Resources   *ociResources  `json:"resources,omitempty"`
	}
	ociNamespace struct {
		Type string `json:"type"`
		Path string `json:"path,omitempty"`
	}
	ociIDMap struct {
		ContainerID uint32 `json:"containerID"`
		HostID      uint32 `json:"hostID"`
		Size        uint32 `json:"size"`
	}
	ociResources struct {
		Memory *ociMemory `json:"memory,omitempty"`
	}
	ociMemory struct {
		Limit int64 `json:"limit"`
	}
)

// Config renders c as an OCI bundle's config.json. It refuses what runsc
// would take in a way airlock does not mean: relative paths, a process
// with no program, an empty id range.
func (c *Container) Config() ([]byte, error) {
	switch {
	case !filepath.IsAbs(c.Root):
		return nil, fmt.Errorf("gvisor: root %q is not absolute", c.Root)
	case len(c.Args) == 0 || c.Args[0] == "":
		return nil, fmt.Errorf("gvisor: the process has no program")
	case !c.PathLookup && !strings.HasPrefix(c.Args[0], "/"):
		return nil, fmt.Errorf("gvisor: the process %q is not an absolute path", c.Args)
	case !filepath.IsAbs(c.Cwd):
		return nil, fmt.Errorf("gvisor: working directory %q is not absolute", c.Cwd)
	case c.IDSize == 0 || c.IDBase == 0:
		return nil, fmt.Errorf("gvisor: id range %d+%d: the sandbox's ids must map onto a range of its own", c.IDBase, c.IDSize)
	case c.NetNS == "":
		return nil, fmt.Errorf("gvisor: no network namespace")
	}
	caps := append([]string{}, c.Caps...)
	s := ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			Args: c.Args, Env: c.Env, Cwd: c.Cwd,
			User:            ociUser{UID: c.UID, GID: c.GID},
			Capabilities:    ociCaps{Bounding: []string{}, Effective: caps, Permitted: caps, Inheritable: caps, Ambient: caps},
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: c.Root, Readonly: !c.RootWritable},
		Hostname: c.Hostname,
		Mounts:   []ociMount{},
		Linux: ociLinux{
			// A new user namespace for the sandbox's own processes,
			// mapped onto its range; new pid, ipc, uts and mount
			// namespaces; the network namespace airlock made.
			Namespaces: []ociNamespace{
				{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "user"},
				{Type: "network", Path: c.NetNS},
			},
			UIDMappings: []ociIDMap{{ContainerID: 0, HostID: c.IDBase, Size: c.IDSize}},
			GIDMappings: []ociIDMap{{ContainerID: 0, HostID: c.IDBase, Size: c.IDSize}},
		},
	}
	for _, r := range c.Rlimits {
		s.Process.Rlimits = append(s.Process.Rlimits, ociRlimit{Type: r.Type, Hard: r.Hard, Soft: r.Soft})
	}
	if c.MemoryBytes > 0 {
		s.Linux.Resources = &ociResources{Memory: &ociMemory{Limit: c.MemoryBytes}}
	}
	for _, m := range c.Mounts {
		if !filepath.IsAbs(m.Destination) {
			return nil, fmt.Errorf("gvisor: mount point %q is not absolute", m.Destination)
		}
		om := ociMount{Destination: m.Destination, Type: m.Type, Source: m.Source, Options: m.Options}
		if m.Type == "bind" {
			if !filepath.IsAbs(m.Source) {
				return nil, fmt.Errorf("gvisor: bind source %q is not absolute", m.Source)
			}
			om.Options = append([]string{"rbind"}, om.Options...)
		}
		if m.ReadOnly {
			om.Options = append(om.Options, "ro")
		} else if m.Type == "bind" {
			om.Options = append(om.Options, "rw")
		}
		s.Mounts = append(s.Mounts, om)
	}
	return json.Marshal(&s)
}
