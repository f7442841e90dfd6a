// Command runlambda runs a Lambda function's bootstrap locally, as `make
// run-lambda` does: under the Lambda Runtime Interface Emulator, with its
// state in a table of the dynalite server that internal/tools/testservers
// started (EDGELIMIT_DYNALITE_ENDPOINT), which it creates first. It stops
// the emulator and the function when it gets SIGINT or SIGTERM, or when
// the emulator ends; testservers then stops dynalite.
//
//	testservers -only dynalite -- runlambda -rie .tools/bin/aws-lambda-rie -addr 127.0.0.1:9000 BOOTSTRAP
//
// The function gets an environment like Lambda's (nothing of the caller's
// leaks in): the table, the endpoint, a region, a random EDGELIMIT_HASH_KEY
// unless the caller sets one, and the caller's EDGELIMIT_OVERRIDES and
// EDGELIMIT_SHADOW, with which it changes policies without a rebuild as a
// deployment does.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/edgelimit/edgelimit/internal/ddb"
)

func main() {
	rie := flag.String("rie", ".tools/bin/aws-lambda-rie", "the Lambda Runtime Interface Emulator")
	addr := flag.String("addr", "127.0.0.1:9000", "where the emulator takes invocations")
	table := flag.String("table", "edgelimit", "the table to create and give the function")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: runlambda [-rie PATH] [-addr HOST:PORT] [-table NAME] BOOTSTRAP")
		os.Exit(2)
	}
	if err := run(*rie, *addr, *table, flag.Arg(0)); err != nil {
		fmt.Fprintf(os.Stderr, "runlambda: %v\n", err)
		os.Exit(1)
	}
}

func run(rie, addr, table, boot string) error {
	endpoint := os.Getenv("EDGELIMIT_DYNALITE_ENDPOINT")
	if endpoint == "" {
		return fmt.Errorf("EDGELIMIT_DYNALITE_ENDPOINT is not set: run under internal/tools/testservers (make run-lambda)")
	}
	boot, err := filepath.Abs(boot)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := ddb.NewClient(ctx, ddb.ClientOptions{Endpoint: endpoint})
	if err != nil {
		return err
	}
	if err := ddb.CreateTable(ctx, client, table); err != nil {
		return fmt.Errorf("creating table %q on dynalite at %s: %w", table, endpoint, err)
	}

	hashKey := os.Getenv("EDGELIMIT_HASH_KEY")
	if hashKey == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		hashKey = base64.StdEncoding.EncodeToString(b)
	}
	runtimeAPI, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", runtimeAPI, boot)
	cmd.Dir = filepath.Dir(boot)
	cmd.Env = []string{
		"PATH=/usr/bin:/bin", "TZ=UTC", "AWS_REGION=us-east-1",
		"AWS_LAMBDA_FUNCTION_NAME=" + filepath.Base(filepath.Dir(boot)), "AWS_LAMBDA_FUNCTION_TIMEOUT=30",
		"EDGELIMIT_TABLE=" + table, "EDGELIMIT_DYNAMODB_ENDPOINT=" + endpoint, "EDGELIMIT_HASH_KEY=" + hashKey,
	}
	for _, k := range []string{"EDGELIMIT_OVERRIDES", "EDGELIMIT_SHADOW"} {
		if v := os.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Its own process group, so that the function it starts stops with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the emulator (make tools installs it): %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer stop(cmd, done)

	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("the emulator exited before listening on %s: %v", addr, err)
		case <-sig:
			return nil
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the emulator did not listen on %s within 30s", addr)
		}
	}
	fmt.Printf("runlambda: %s on http://%s/2015-03-31/functions/function/invocations (table %q on dynalite at %s); Ctrl-C stops it all\n",
		filepath.Base(filepath.Dir(boot)), addr, table, endpoint)
	select {
	case <-sig:
		return nil
	case err := <-done:
		done <- err
		return fmt.Errorf("the emulator exited: %v", err)
	}
}

// stop ends the emulator and the function (its process group): SIGTERM,
// then SIGKILL if it has not gone within 5 seconds.
func stop(cmd *exec.Cmd, done chan error) {
	select {
	case err := <-done:
		done <- err
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the function, if it outlived the emulator
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
