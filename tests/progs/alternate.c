/* PLACEHOLDER: the timeline helper writes this workload. */
int main(void) { return 0; }
