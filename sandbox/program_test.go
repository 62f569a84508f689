package sandbox

import (
	"reflect"
	"testing"

	"github.com/airlockhq/airlock/internal/sbinit"
)

// TestSetupKey changes each field of a setup in turn, and each field of
// the structs in its lists: every change must give another key, or two
// different sandboxes would share one program. (The seccomp filter is
// the runtime's own; the key holds its length.)
func TestSetupKey(t *testing.T) {
	base := sbinit.Setup{
		RootDir: "/r", ScratchDir: "/s", Hostname: "h", UID: 1, GID: 2, InitUID: 3, DiskBytes: 4, DiskInodes: 5, Workdir: "/w",
		Binds: []sbinit.Bind{{Source: "/a", Target: "/b"}}, Volumes: []string{"/v"}, Symlinks: []sbinit.Symlink{{Target: "t", Path: "/p"}},
		Files: []sbinit.File{{Path: "/f", Data: "d", Mode: 6}}, Devices: []string{"null"},
		Rlimits: []sbinit.Rlimit{{Resource: 7, Cur: 8, Max: 9}}, Seccomp: []byte{1}, Image: &sbinit.ImageRoot{},
	}
	seen := map[string]string{setupKey(&base): "base"}
	check := func(name string, c sbinit.Setup) {
		k := setupKey(&c)
		if other, ok := seen[k]; ok {
			t.Errorf("%s: same key as %s", name, other)
		}
		seen[k] = name
	}
	v := reflect.ValueOf(base)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		c := base
		fv := reflect.ValueOf(&c).Elem().Field(i)
		switch fv.Kind() {
		case reflect.String:
			fv.SetString(fv.String() + "x")
		case reflect.Int, reflect.Int64:
			fv.SetInt(fv.Int() + 100)
		case reflect.Bool:
			fv.SetBool(true)
		case reflect.Pointer: // Image
			c.Image = &sbinit.ImageRoot{Writable: true}
			check("Image.Writable", c)
			c.Image = nil
		case reflect.Slice:
			if f.Name == "Seccomp" {
				c.Seccomp = []byte{1, 2}
				break
			}
			// Each field of the first element, then one element more.
			el := reflect.New(fv.Type()).Elem()
			el.Set(reflect.AppendSlice(el, fv))
			e0 := el.Index(0)
			if e0.Kind() == reflect.Struct {
				for j := range e0.NumField() {
					cc := c
					cp := reflect.New(fv.Type()).Elem()
					cp.Set(reflect.AppendSlice(cp, fv))
					g := cp.Index(0).Field(j)
					switch g.Kind() {
					case reflect.String:
						g.SetString(g.String() + "x")
					case reflect.Bool:
						g.SetBool(!g.Bool())
					default:
						g.Set(reflect.ValueOf(g.Interface()).Convert(g.Type()))
						if g.CanInt() {
							g.SetInt(g.Int() + 100)
						} else {
							g.SetUint(g.Uint() + 100)
						}
					}
					reflect.ValueOf(&cc).Elem().Field(i).Set(cp)
					check(f.Name+"."+e0.Type().Field(j).Name, cc)
				}
			}
			fv.Set(reflect.Append(el, e0))
		default:
			t.Fatalf("field %s: add its kind", f.Name)
		}
		check(f.Name, c)
	}
}
