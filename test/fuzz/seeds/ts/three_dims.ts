# synthetic fixture for cde-train/cde-eval CLI tests (made by test/cli/fixtures generator, rising vs falling)
@problemName Updown
@timeStamps false
@missing false
@univariate false
@dimensions 3
@equalLength false
@classLabel true up down
@data
1,2,3:4,5,6:7,8,9:up
3,2,1:6,5,4:9,8,7:down
