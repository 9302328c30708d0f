package state

// SetPageSize sets the Limit of each Scan and Query page, so tests exercise pagination with a few items.
func SetPageSize(d *DynamoDB, n int32) { d.pageSize = n }
