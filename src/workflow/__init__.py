"""stepstone: durable jobs on a bucket."""
