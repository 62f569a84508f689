// Package redact removes a credential from data on its way back into a
// sandbox.
//
// The credential broker attaches a secret (an API token) to requests on the
// host side, so the sandbox never holds it. An upstream service can still
// send the secret back: an error message that quotes the rejected token, an
// echo endpoint that reflects request headers, a redirect URL that carries it
// as a query parameter, a JSON field holding an HTTP Basic header. Everything
// the upstream returns (headers and body) therefore passes through a
// [Redactor], which replaces every occurrence of the secret with [Mask] — not
// only the secret as written but also the encodings an upstream is likely to
// apply on its own:
//
//   - the secret itself;
//   - URL encodings: [url.QueryEscape], [url.PathEscape] and every byte
//     percent-encoded, their escapes' hex digits matched in any case, any
//     mix of cases in one value included;
//   - JSON string escapes: Go's (which writes "<", ">" and "&" as \u003c
//     and so on) and with "/" as "\/";
//   - for secrets of 6 bytes or more, hex in both cases, and every byte as
//     a JSON \u00XX escape in both cases;
//   - base64 in the standard and URL alphabets, padded and unpadded, of the
//     secret and of its URL encoding;
//   - base64 "cores": the characters of the encoding that depend on the
//     secret's bytes alone, at each of the three byte alignments and in both
//     alphabets. They catch the secret inside a longer encoded value, such as
//     an HTTP Basic header that encodes "user:" + secret as one unit. Cores
//     shorter than 8 characters are not kept (they would match innocent
//     data), so secrets shorter than 6 bytes get no cores at all, and a
//     6-byte secret only the one at the start of an encoded value.
//
// Where occurrences of different forms overlap, the union of their ranges is
// replaced by one Mask, so no fragment of a secret is left next to a mask.
// Occurrences that merely touch get one Mask each.
//
// Redaction is a last line of defence, not a guarantee. It does not catch
// the secret in transformations it does not know (the URL-encoded form of
// the base64 form, JSON escapes of only some characters as \u00XX,
// compression), split by the upstream in ways other than encoding, or in
// pieces shorter than a form (the broker strips Range, so a caller cannot
// ask for such pieces, and refuses secrets under 8 bytes). Callers that know how the
// secret is wrapped should pass the wrapped value too (for example both the
// token and "Bearer " + token, or "user:" + token for HTTP Basic), so its
// whole encodings are redacted as well. Very short secrets are a poor fit:
// a one-byte secret redacts every occurrence of that byte.
//
// [Redactor.Writer] redacts a stream, such as a response body, including
// occurrences split across writes, while holding back fewer bytes than the
// longest form.
package redact
