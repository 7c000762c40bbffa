package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/server"
)

// TestEnginesRefuseWhatNetHTTPRefuses: requests net/http refuses before
// any handler runs are refused with the same status on fasthttp, and
// decide nothing: a request line of HTTP/2.0 (505), an Expect other than
// 100-continue (417) and a request target with a fragment (404, no
// endpoint). fasthttp decided and counted all three. (Transfer-Encoding:
// identity, 501 on net/http, is still decided on fasthttp, which drops
// the header: docs/operations.md.)
func TestEnginesRefuseWhatNetHTTPRefuses(t *testing.T) {
	body := check("api", "refused")
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		e := serveEngine(t, engine, engineConfig, memStore(t), nil)
		for _, tc := range []struct {
			name, line, header string
			status             int
		}{
			{"HTTP/2.0", "POST /v1/check HTTP/2.0", "", http.StatusHTTPVersionNotSupported},
			{"Expect: foo", "POST /v1/check HTTP/1.1", "Expect: foo\r\n", http.StatusExpectationFailed},
			{"fragment", "POST /v1/check#x HTTP/1.1", "", http.StatusNotFound},
		} {
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			req := fmt.Sprintf("%s\r\nHost: x\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s", tc.line, tc.header, len(body), body)
			if _, err := conn.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if want := fmt.Sprintf("HTTP/1.1 %d ", tc.status); err != nil || !strings.HasPrefix(line, want) {
				t.Errorf("%s: %s: %q %v, want %s", engine, tc.name, line, err, want)
			}
		}
		if a := send(t, http.DefaultClient, e.url, exchange{method: "POST", path: "/v1/peek", body: body}); !strings.Contains(a.body, `"remaining":2,`) {
			t.Errorf("%s: after the refused requests: %s; want nothing counted", engine, a.body)
		}
	}
}
