package main

import "testing"

func TestEvictFloor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{in: "", want: 0}, {in: "0", want: 0}, {in: "never", want: -1},
		{in: "5m", want: 300}, {in: "90s", want: 90}, {in: "1500ms", want: 1},
		{in: "500ms", wantErr: true}, {in: "-1m", wantErr: true}, {in: "soon", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := evictFloor(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("evictFloor(%q) = %d, %v; want %d (error %v)", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}
