// Command netprobe runs in a guest and tries one connection: "tcp ADDR"
// dials, reads one line and prints it; "udp ADDR PAYLOAD" sends one
// datagram and prints the first answer. It exits 1 when nothing came
// back in time. Built by the qemu package's network tests; never shipped.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: netprobe tcp ADDR | udp ADDR PAYLOAD"))
	}
	timeout := 3 * time.Second
	switch os.Args[1] {
	case "tcp":
		c, err := net.DialTimeout("tcp", os.Args[2], timeout)
		if err != nil {
			fail(err)
		}
		c.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fail(err)
		}
		fmt.Print(line)
	case "udp":
		if len(os.Args) < 4 {
			fail(fmt.Errorf("udp needs a payload"))
		}
		c, err := net.Dial("udp", os.Args[2])
		if err != nil {
			fail(err)
		}
		if _, err := c.Write([]byte(os.Args[3])); err != nil {
			fail(err)
		}
		c.SetDeadline(time.Now().Add(timeout))
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s\n", buf[:n])
	default:
		fail(fmt.Errorf("unknown probe %q", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "netprobe:", err)
	os.Exit(1)
}
