// A partner's Go program: golang.org/x/oauth2/clientcredentials against POST /oauth/token, in its
// default mode (AuthStyleAutoDetect: HTTP Basic first) or with the credentials in the body
// (AuthStyleInParams). Prints the access token on stdout.
//
//	go run . -token-url URL -client-id ID -client-secret SECRET [-style auto|params] [-resolve NAME=ADDRESS]
//
// -resolve connects to ADDRESS for NAME, as curl --resolve does (a cluster's ingress, whose name is in
// no DNS); TLS is still verified for NAME (SSL_CERT_FILE names the CA to trust).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

func main() {
	tokenURL := flag.String("token-url", "", "the token endpoint")
	clientID := flag.String("client-id", "", "client id")
	clientSecret := flag.String("client-secret", "", "client secret")
	style := flag.String("style", "auto", "auto (the library's default) or params (body fields)")
	resolve := flag.String("resolve", "", "NAME=ADDRESS: connect to ADDRESS for NAME")
	flag.Parse()
	ctx := context.Background()
	if name, address, ok := strings.Cut(*resolve, "="); ok {
		dialer := &net.Dialer{Timeout: 10 * time.Second}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.DialContext = func(ctx context.Context, network, hostPort string) (net.Conn, error) {
			if host, port, err := net.SplitHostPort(hostPort); err == nil && strings.EqualFold(host, name) {
				hostPort = net.JoinHostPort(address, port)
			}
			return dialer.DialContext(ctx, network, hostPort)
		}
		ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: transport, Timeout: 30 * time.Second})
	}
	config := clientcredentials.Config{ClientID: *clientID, ClientSecret: *clientSecret, TokenURL: *tokenURL}
	switch *style {
	case "auto":
	case "header":
		config.AuthStyle = oauth2.AuthStyleInHeader
	case "params":
		config.AuthStyle = oauth2.AuthStyleInParams
	default:
		fmt.Fprintln(os.Stderr, "unknown -style", *style)
		os.Exit(2)
	}
	token, err := config.Token(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(token.AccessToken)
}
