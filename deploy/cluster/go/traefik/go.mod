// Builds Traefik (the cluster's ingress controller) with deploy/cluster/build-go.sh. Traefik's own
// go.mod carries replace and exclude directives, which Go ignores outside the main module (and
// `go install pkg@version` refuses), so this main module repeats them. Keep them equal to Traefik's.

module partner-integration.local/cluster/go/traefik

go 1.24.0

require github.com/traefik/traefik/v3 v3.5.3

replace (
	github.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1-0.20200324110947-a37a7636d23e
	github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59
	github.com/mailgun/minheap => github.com/containous/minheap v0.0.0-20190809180810-6e71eb837595
)

exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible
