package clientip_test

import (
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/floodgate-rl/floodgate/clientip"
)

// Behind a load balancer in 10.0.0.0/8, the client is the rightmost
// X-Forwarded-For entry that is not one of the trusted proxies; what the
// client wrote further left is ignored.
func ExampleResolver_ClientIP() {
	trusted, err := clientip.ParsePrefixes([]string{"10.0.0.0/8"})
	if err != nil {
		log.Fatal(err)
	}
	res, err := clientip.New(clientip.Options{TrustedProxies: trusted, IPv6Prefix: 64})
	if err != nil {
		log.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.1.2.3:50000"
	req.Header.Set("X-Forwarded-For", "1.1.1.1, 2001:db8:5:6::42, 10.9.9.9")
	ip, _ := res.ClientIP(req)
	key, _ := res.Key(req)
	fmt.Println(ip, key)

	// The same header from a peer that is not a trusted proxy is ignored.
	req.RemoteAddr = "198.51.100.9:50000"
	ip, _ = res.ClientIP(req)
	fmt.Println(ip)
	// Output:
	// 2001:db8:5:6::42 2001:db8:5:6::/64
	// 198.51.100.9
}
