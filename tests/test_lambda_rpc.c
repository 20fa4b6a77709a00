/* lambda_rpc: being written. */
#include <stdio.h>
int main(void)
{
    fprintf(stderr, "lambda_rpc: not written yet\n");
    return 1;
}
