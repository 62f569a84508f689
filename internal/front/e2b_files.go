package front

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// A file call (GET or POST /files) through a cluster's front. Its bytes
// stream through: the front holds none of them. Before a byte of a body
// is read, the call must carry what a node could accept (a sandbox id
// and an access token, or a signature of the form a sandbox makes), and
// the node must have accepted it: the front asks with "Expect:
// 100-continue", and a node refuses a call it does not authenticate
// without reading its body. An upload the front could not check would
// otherwise be read (and once was held, 20 MiB of it) for any caller
// without a credential.

// maxUploads bounds the uploads the front passes on at once: each holds
// the caller's connection and a node's.
const maxUploads = 128

// expectWait bounds the wait for a node's answer to "Expect:
// 100-continue" before the body is sent anyway (the transport's rule):
// far longer than a node takes to check a call.
const expectWait = 10 * time.Second

// signatureForm is the form of a signed URL's signature (e2b.Signature):
// one that is not cannot be any sandbox's.
var signatureForm = regexp.MustCompile(`^v1_[A-Za-z0-9+/]{43}$`)

// e2bFiles passes a file call to its sandbox's node: named by the
// E2b-Sandbox-Id header, or, for a signed URL, found by asking the
// nodes in turn until one accepts the signature.
func (f *Front) e2bFiles(w http.ResponseWriter, r *http.Request) {
	if err := f.e2bFile(w, r); err != nil {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
			err = sandboxSide(id, err)
		}
		writeE2BErr(w, err)
	}
}

// e2bFile is e2bFiles; the error when no node answered.
func (f *Front) e2bFile(w http.ResponseWriter, r *http.Request) error {
	id := r.Header.Get("E2b-Sandbox-Id")
	if err := checkFileCall(r, id); err != nil {
		return err
	}
	if r.Method == http.MethodPost {
		select {
		case f.uploads <- struct{}{}:
			defer func() { <-f.uploads }()
		default:
			return &retryLater{errdefs.Errorf(errdefs.ErrUnavailable, "%d uploads are passing through this front already; try again", maxUploads), 1}
		}
	}
	body := &offered{r: r.Body}
	if id != "" {
		n, err := f.e2bNodeOf(id)
		if err != nil {
			return err
		}
		resp, err := f.forwardFile(r, n.E2B, body)
		if err != nil {
			return f.e2bSendErr(r, n, id, err)
		}
		relay(w, resp, n.Name)
		return nil
	}
	var last *http.Response
	lastNode := ""
	for _, n := range f.e2bNodes() {
		resp, err := f.forwardFile(r, n.E2B, body)
		if err == nil {
			// A node whose sandboxes did not sign the URL answers 401;
			// the answer is the node's that did, whatever it says, else
			// a 401.
			if last == nil || last.StatusCode == http.StatusUnauthorized || resp.StatusCode/100 == 2 {
				if last != nil {
					last.Body.Close()
				}
				last, lastNode = resp, n.Name
			} else {
				resp.Body.Close()
			}
			if resp.StatusCode/100 == 2 {
				break
			}
		}
		if body.taken.Load() {
			// This node read the body: it accepted the signature, and
			// its answer is the answer (the bytes it took cannot be
			// offered to another).
			if err != nil {
				return errdefs.Errorf(errNodeFailed, "node %s failed the call", n.Name)
			}
			break
		}
	}
	if last != nil {
		relay(w, last, lastNode)
		return nil
	}
	return errdefs.New(errSignature, "invalid signature")
}

// checkFileCall refuses a file call that no node could accept, before
// anything of its body is read.
func checkFileCall(r *http.Request, id string) error {
	q := r.URL.Query()
	if id != "" {
		if r.Header.Get("X-Access-Token") == "" {
			return errdefs.Errorf(errdefs.ErrNotFound, "sandbox %q not found, or the access token is not its (X-Access-Token is required)", shorten(id))
		}
		return nil
	}
	if !q.Has("signature") {
		return errdefs.New(errdefs.ErrInvalid, "a file call carries E2b-Sandbox-Id and X-Access-Token, or is a signed URL")
	}
	if !signatureForm.MatchString(q.Get("signature")) {
		return errdefs.New(errSignature, "invalid signature")
	}
	if v := q.Get("signature_expiration"); v != "" {
		exp, err := strconv.ParseInt(v, 10, 64)
		if err != nil || exp <= 0 {
			return errdefs.Errorf(errdefs.ErrInvalid, "signature_expiration %q is not a time in Unix seconds", shorten(v))
		}
		if time.Now().Unix() > exp {
			return errdefs.New(errSignature, "signature is already expired")
		}
	}
	return nil
}

// shorten cuts a caller's string for an answer.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// forwardFile sends a file call to a node's E2B API, its body (if any)
// only once the node has asked for it.
func (f *Front) forwardFile(r *http.Request, base string, body *offered) (*http.Response, error) {
	var rd io.Reader
	if r.Body != nil && r.Body != http.NoBody {
		rd = body
	}
	out, err := f.outgoing(r, base, rd, r.ContentLength)
	if err != nil {
		return nil, err
	}
	if rd != nil {
		out.Header.Set("Expect", "100-continue")
	}
	return f.hc.Do(out)
}

// offered is a caller's body offered to nodes in turn: taken says one
// read from it, after which it cannot be offered to another.
type offered struct {
	r     io.Reader
	taken atomic.Bool
}

func (o *offered) Read(p []byte) (int, error) {
	o.taken.Store(true)
	return o.r.Read(p)
}
