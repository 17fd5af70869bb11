//go:build !linux

package vmnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
)

// ErrUnavailable: machine networks need Linux.
var ErrUnavailable = errors.New("machine networks unavailable: not Linux")

// ErrClosed is returned by a Net's methods after Close.
var ErrClosed = errors.New("machine network closed")

// Config: see the Linux build.
type Config struct {
	ProxyPort    uint16
	ResolverPort uint16
}

// Net: see the Linux build; none is ever made here.
type Net struct{}

func Available() error                                       { return ErrUnavailable }
func New(context.Context, Config) (*Net, error)              { return nil, ErrUnavailable }
func Rejoin(context.Context, Config, int, int) (*Net, error) { return nil, ErrUnavailable }
func (*Net) TapFile() *os.File                               { return nil }
func (*Net) ProxyAddr() netip.AddrPort                       { return netip.AddrPort{} }
func (*Net) ResolverAddr() netip.AddrPort                    { return netip.AddrPort{} }
func (*Net) Listen(string, string) (net.Listener, error)     { return nil, ErrUnavailable }
func (*Net) ListenPacket(string, string) (net.PacketConn, error) {
	return nil, ErrUnavailable
}
func (*Net) Close() error             { return nil }
func (*Net) Drops() (*DropLog, error) { return nil, ErrUnavailable }

// DropLog: see the Linux build.
type DropLog struct{}

func (*DropLog) Read() ([]Drop, int64, error)      { return nil, 0, ErrUnavailable }
func (*DropLog) Close() error                      { return nil }
func OriginalDst(net.Conn) (netip.AddrPort, error) { return netip.AddrPort{}, ErrUnavailable }
