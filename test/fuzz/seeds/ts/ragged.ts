# synthetic fixture for cde-train/cde-eval CLI tests (made by test/cli/fixtures generator, rising vs falling)
@problemName Updown
@timeStamps false
@missing false
@univariate false
@dimensions 2
@equalLength true
@seriesLength 10
@classLabel true up down
@data
-0.1653,0.3076,0.5080,0.7883,1.1299,1.4256,1.7025,1.9971,2.5612,2.6328:0.0971,0.5037,1.0399,0.7382,0.2891,-0.2872,-0.9246,-1.1789,-0.6865,0.0011:up
1,2,3:1,2:down
