package main

import (
	_ "embed"
	"log"
	"net/http"

	"github.com/edgelimit/edgelimit"
	"github.com/edgelimit/edgelimit/middleware"
	"github.com/edgelimit/edgelimit/policy"
	"github.com/edgelimit/edgelimit/setup"
	"github.com/edgelimit/edgelimit/setup/memory"
)

//go:embed policies.yaml
var policies []byte

func main() {
	file, err := policy.Parse("policies.yaml", policies)
	if err != nil {
		log.Fatal(err)
	}
	limiters, err := setup.Limiters(file, []setup.Backend{memory.Durable()}, setup.BackendEnv{})
	if err != nil {
		log.Fatal(err)
	}
	engine, err := edgelimit.New(edgelimit.Config{Policies: file, Limiters: limiters})
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", middleware.Handler(engine, hello)))
}
