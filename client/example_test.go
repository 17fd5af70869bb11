package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/clienttest"
)

// Another program creates a session, runs a command in it and deletes it.
// A fake coordinator stands in for a real one here; `engrams dev` prints
// the URL and token of a local one.
func Example() {
	fake := clienttest.Start()
	defer fake.Close()
	url, token := fake.URL, clienttest.Token

	ctx := context.Background()
	c := client.New(url, token)
	sessions := c.Sessions()

	// With wait, Create returns once the session's VM is running.
	s, err := sessions.Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 512}}, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("session", s.ID, s.State)

	code, err := sessions.Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"echo", "hello from the VM"}}, os.Stdout, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit code", code)

	// With wait, Delete returns once the VM is gone.
	if err := sessions.Delete(ctx, s.ID, true); err != nil {
		log.Fatal(err)
	}
	s, err = sessions.Get(ctx, s.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("session", s.ID, s.State)
	// Output:
	// session s1 active
	// hello from the VM
	// exit code 0
	// session s1 completed
}

// Errors from the API are *client.APIError values; helpers tell the common
// codes apart.
func ExampleIsNotFound() {
	fake := clienttest.Start()
	defer fake.Close()
	c := client.New(fake.URL, clienttest.Token)

	_, err := c.Sessions().Get(context.Background(), "no-such-session")
	fmt.Println(client.IsNotFound(err))
	// Output: true
}
