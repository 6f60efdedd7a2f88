// A partner's Go program: golang.org/x/oauth2/clientcredentials against POST /oauth/token, in its
// default mode (AuthStyleAutoDetect: HTTP Basic first) or with the credentials in the body
// (AuthStyleInParams). Prints the access token on stdout.
//
//	go run . -token-url URL -client-id ID -client-secret SECRET [-style auto|params]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

func main() {
	tokenURL := flag.String("token-url", "", "the token endpoint")
	clientID := flag.String("client-id", "", "client id")
	clientSecret := flag.String("client-secret", "", "client secret")
	style := flag.String("style", "auto", "auto (the library's default) or params (body fields)")
	flag.Parse()
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
	token, err := config.Token(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(token.AccessToken)
}
