package domain

import (
	"errors"
	"testing"
	"time"
)

func TestRoomErrorRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   RoomError
		want RoomError
	}{
		{name: "whole seconds", in: RoomError{Why: "a: at its limit of 8 sessions", RetryAfter: 40 * time.Second},
			want: RoomError{Why: "a: at its limit of 8 sessions", RetryAfter: 40 * time.Second}},
		{name: "rounded up", in: RoomError{Why: "x; retry after 3s", RetryAfter: 1500 * time.Millisecond},
			want: RoomError{Why: "x; retry after 3s", RetryAfter: 2 * time.Second}},
		{name: "at least a second", in: RoomError{Why: "x"}, want: RoomError{Why: "x", RetryAfter: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := tt.in
			if !errors.Is(&in, ErrNoRoom) {
				t.Fatal("a RoomError is not ErrNoRoom")
			}
			got, ok := RoomRefusal(in.Error())
			if !ok || *got != tt.want {
				t.Fatalf("RoomRefusal(%q) = %+v, %v; want %+v", in.Error(), got, ok, tt.want)
			}
		})
	}
	for _, msg := range []string{"", "boom", "no host has room: x", "no host has room: x; retry after soon", "gave up: no host has room: x; retry after 3s"} {
		if _, ok := RoomRefusal(msg); ok {
			t.Errorf("RoomRefusal(%q) read a refusal", msg)
		}
	}
}
