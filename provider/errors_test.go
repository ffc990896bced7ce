package provider

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestProviderError(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	tests := []struct {
		name      string
		err       *ProviderError
		text      string
		retryable bool
		sentinel  error // errors.Is target besides ErrRetryable/ErrPermanent, or nil
	}{
		{"Permanent", Permanent("ack_orchestration_item", "bad token"), "ack_orchestration_item: bad token", false, nil},
		{"Retryable", Retryable("fetch_work_item", "database is locked"), "fetch_work_item: database is locked", true, nil},
		{"Permanentf", Permanentf("ack_work_item", ErrLockExpired, "lock of %s expired", "tok"), "ack_work_item: lock of tok expired", false, ErrLockExpired},
		{"Retryablef", Retryablef("read", cause, "short read after %d bytes", 3), "read: short read after 3 bytes", true, cause},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error = tt.err
			if got := err.Error(); got != tt.text {
				t.Errorf("Error() = %q, want %q", got, tt.text)
			}
			wrapped := fmt.Errorf("dispatcher: %w", err)
			twice := fmt.Errorf("outer: %w", wrapped)
			for _, e := range []error{err, wrapped, twice} {
				if got := IsRetryable(e); got != tt.retryable {
					t.Errorf("IsRetryable(%v) = %v, want %v", e, got, tt.retryable)
				}
				if got := errors.Is(e, ErrRetryable); got != tt.retryable {
					t.Errorf("errors.Is(%v, ErrRetryable) = %v", e, got)
				}
				if got := errors.Is(e, ErrPermanent); got == tt.retryable {
					t.Errorf("errors.Is(%v, ErrPermanent) = %v", e, got)
				}
				var pe *ProviderError
				if !errors.As(e, &pe) || pe != tt.err {
					t.Errorf("errors.As(%v) did not find the ProviderError", e)
				}
				if tt.sentinel != nil && !errors.Is(e, tt.sentinel) {
					t.Errorf("errors.Is(%v, %v) = false", e, tt.sentinel)
				}
				if errors.Is(e, ErrNotFound) {
					t.Errorf("errors.Is(%v, ErrNotFound) = true", e)
				}
			}
			if got := tt.err.Unwrap(); got != tt.sentinel {
				t.Errorf("Unwrap() = %v, want %v", got, tt.sentinel)
			}
		})
	}
}

func TestIsRetryableNonProviderErrors(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), fmt.Errorf("wrapped: %w", io.EOF), ErrRetryable} {
		if IsRetryable(err) {
			t.Errorf("IsRetryable(%v) = true, want false", err)
		}
	}
}

func TestProviderErrorSentinelKinds(t *testing.T) {
	sentinels := []error{ErrInvalidLockToken, ErrLockExpired, ErrDuplicateEvent, ErrInvalidEvent, ErrInvalidWorkItem,
		ErrNotFound, ErrInstanceRunning, ErrTooLarge, ErrCorrupt, ErrClosed}
	for _, s := range sentinels {
		err := fmt.Errorf("ctx: %w", Permanentf("op", s, "msg"))
		if !errors.Is(err, s) {
			t.Errorf("errors.Is(%v, %v) = false", err, s)
		}
		if !errors.Is(err, ErrPermanent) || errors.Is(err, ErrRetryable) {
			t.Errorf("%v: wrong retryability", err)
		}
		for _, other := range sentinels {
			if other != s && errors.Is(err, other) {
				t.Errorf("errors.Is(%v, %v) = true", err, other)
			}
		}
	}
}
