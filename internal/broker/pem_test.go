package broker

import (
	"encoding/pem"
	"net/http/httptest"
)

func pemOf(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}
