package provider_test

import (
	"fmt"

	"github.com/durofs/durofs/provider"
)

func ExampleMarshalWorkItem() {
	item := provider.ActivityExecute{
		Instance:    "order-1",
		ExecutionID: 1,
		ID:          2,
		Name:        "Charge",
		Input:       `{"amount":5}`,
	}
	b, err := provider.MarshalWorkItem(item)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(string(b))

	back, err := provider.UnmarshalWorkItem(b)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Printf("%T routed to the %s queue\n", back, provider.QueueOf(back))
	// Output:
	// {"ActivityExecute":{"instance":"order-1","execution_id":1,"id":2,"name":"Charge","input":"{\"amount\":5}"}}
	// provider.ActivityExecute routed to the worker queue
}
