/* keeps the support library non-empty */
typedef int qs_test_support_empty_unit;
