/* Placeholder: replaced by the agent work. */
#include <jni.h>
#include <jvmti.h>

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) { return 0; }
JNIEXPORT jint JNICALL Agent_OnAttach(JavaVM *vm, char *options, void *reserved) { return 0; }
JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *vm) {}
