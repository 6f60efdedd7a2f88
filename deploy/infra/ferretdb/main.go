// Command ferretdb-local runs FerretDB v1 with its SQLite backend on one TCP address.
// It exists because `go install` of FerretDB's own command panics at start (a version
// file is missing from the module zip); the embeddable package has no such problem.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:27017", "TCP address to listen on")
	dataDir := flag.String("data-dir", "data", "directory for the SQLite databases")
	flag.Parse()

	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "ferretdb-local: cannot create %s: %v\n", *dataDir, err)
		os.Exit(1)
	}

	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + *dataDir + "/",
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferretdb-local: %v\n", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "{\"msg\":\"ferretdb listening\",\"uri\":%q}\n", f.MongoDBURI())
	if err := f.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "ferretdb-local: %v\n", err)
		os.Exit(1)
	}
}
